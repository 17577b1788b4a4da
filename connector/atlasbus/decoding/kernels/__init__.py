"""The compiled path (numba): replies cut and columns decoded in place, and when it serves."""

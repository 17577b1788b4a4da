"""Every option, parsed once into frozen, validated objects (no I/O)."""

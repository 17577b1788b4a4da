"""The bus's housekeeping and figures: status, lag, the reaper, retention, pending entries."""

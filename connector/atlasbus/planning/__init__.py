"""Where each batch ends and what it reads (driver): positions, batch plans, data loss, pacing."""

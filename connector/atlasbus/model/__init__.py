"""What the rest talks in: entry IDs, offsets and their plans, read schemas, reason codes."""

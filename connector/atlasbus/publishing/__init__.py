"""The sink's side (executor): rows encoded into XADD commands and published, exactly once."""

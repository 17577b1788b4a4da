"""The bus's wire format: the envelope's fields, the raw entry as text, the JSON-object check."""

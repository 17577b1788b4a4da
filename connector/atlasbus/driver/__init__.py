"""The source's driver side: the streaming query's state machine, free of Spark."""

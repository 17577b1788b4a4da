"""A planned range read from Redis (executor): paged XRANGE, read ahead, replies received."""

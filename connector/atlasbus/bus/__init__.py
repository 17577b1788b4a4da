"""Redis itself: the endpoint and its clients, the stream catalog, which streams a query reads."""

"""Tables, charts and the one look of every method: how the report draws what the sections hold."""

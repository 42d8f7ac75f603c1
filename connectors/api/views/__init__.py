"""Views of the Kafka Connect REST API, one module per Connect resource."""

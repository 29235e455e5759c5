"""An example agentrl plugin: the Doors environment and a credit estimator."""

"""Hydra config groups: env/ algo/ model/ rollout/ trainer/ and the root config.yaml."""

"""placeholder until the Sokoban package lands."""

"""The path manager: simulation study, Monte Carlo reference, predictor bench, experiment."""

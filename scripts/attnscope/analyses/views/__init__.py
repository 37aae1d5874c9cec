"""Offline interactive views (head, model and neuron views) of every map of a sequence."""

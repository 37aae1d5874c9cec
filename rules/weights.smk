# Placeholder: filled in by the weights analysis.


def weights_targets():
    return []

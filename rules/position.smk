# Placeholder: filled in by the position analysis.


def position_targets():
    return []

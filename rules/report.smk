# Software versions and configuration, exported next to the results for the report.


def report_targets():
    return []

"""Small statistics helpers."""


def mean(values):
    return sum(values) / len(values)


def median(values):
    middle = len(values) // 2
    return values[middle]

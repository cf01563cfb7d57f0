import sys

sys.path.insert(0, ".")
from stats import mean, median  # noqa: E402

CASES = [([3, 1, 2], 2), ([5], 5), ([4, 1, 3, 2], 2.5), ([10, -2, 7, 7], 7), ([1.5, 0.5], 1.0)]
for values, expected in CASES:
    got = median(list(values))
    assert got == expected, f"median({values}) = {got!r}, expected {expected!r}"
assert mean([1, 2, 3]) == 2
print("all cases pass")

import sys

sys.path.insert(0, ".")
from slug import slugify  # noqa: E402

CASES = {
    "Hello, World!": "hello-world",
    "  Leading and trailing  ": "leading-and-trailing",
    "Already-a-slug": "already-a-slug",
    "Multiple --- dashes___and   spaces": "multiple-dashes-and-spaces",
    "Version 2.0 Released": "version-2-0-released",
    "!!!": "",
    "ÜBER cool": "ber-cool",
}
for text, expected in CASES.items():
    got = slugify(text)
    assert got == expected, f"slugify({text!r}) = {got!r}, expected {expected!r}"

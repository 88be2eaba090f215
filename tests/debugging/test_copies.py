"""The answer written elsewhere in the project: a candidate whose function another file copies (an older version
kept for benchmarks, a vendored duplicate) is refused before it runs; a file that shares a line or two is not a
copy."""
from __future__ import annotations

from flawforge.debugging.candidates import candidates_of
from flawforge.debugging.copies import ProjectCopies

MODULE = '''def translate(pattern):
    """Pattern to regex."""
    i, end = 0, len(pattern)
    parts = []
    while i < end:
        char = pattern[i]
        i += 1
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        else:
            parts.append(char)
    return "".join(parts)


def other(value):
    return value * 2
'''


def test_a_function_another_file_copies_is_refused_and_one_sharing_a_line_is_not():
    copy = "# kept to compare speeds\n" + MODULE.split("\n\n\ndef other")[0].replace('"""Pattern to regex."""',
                                                                                    '"""Old version."""') + "\n"
    sharing = 'def unrelated(pattern):\n    i, end = 0, len(pattern)\n    return end\n'
    files = {"pkg/glob.py": MODULE.encode(), "benchmarks/glob_v1.py": copy.encode(), "pkg/util.py": sharing.encode()}
    copies = ProjectCopies(files)
    candidates = candidates_of({"pkg/glob.py": MODULE}, ["op_change", "off_by_one", "op_swap"])
    translate = [c for c in candidates if c.qualname == "translate"]
    assert translate and all(copies.holding(c, MODULE) == "benchmarks/glob_v1.py" for c in translate)
    # Without the copy, only a shared line: nothing holds the function.
    alone = ProjectCopies({path: data for path, data in files.items() if not path.startswith("benchmarks/")})
    assert all(alone.holding(c, MODULE) is None for c in translate)
    # A copy that already has the changed line as the bug writes it does not hold the answer.
    first = translate[0]
    buggy_copy = first.buggy_source.split("\n\n\ndef other")[0]
    assert ProjectCopies({**files, "benchmarks/glob_v1.py": buggy_copy.encode()}).holding(first, MODULE) is None

"""SWE-style rewards on the docker backend: the task's image holds a repository, the model's
answer is a patch, and the task's tests decide.

    sh scripts/docker-setup && python examples/swe_patch.py

What only images give: each row names the image its repository lives in (``swe/Dockerfile``
puts ``swe/repo`` at ``/repo`` on top of the docker backend's base image, built here offline if
missing). For every completion, a pooled container of that image copies the repository into its
workdir and applies the patch with ``patch -p1`` (the container holds the model's bytes, never
this machine); then the row's own tests (failing before the fix and passing after, as
SWE-bench's ``FAIL_TO_PASS``, plus ``PASS_TO_PASS``) run in sandboxkit's judge, which calls
the patched package in a process of its own. So a patch that edits the repository's tests,
prints "OK" or exits early gains nothing: the verdicts are sealed records of the judge, not
the output of a test run the patch could change. The reward is the fraction of the row's tests
that pass (``resolved``: all of them).

The script checks every reward against the one it should get and that no sandbox tagged with
its job id is left; it exits non-zero if either check fails, 3 where no Docker Engine or base
image is available.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path

from _common import EXIT_UNSUPPORTED, RULE, THIN_RULE, count_sandboxes, job_tag, new_job_id

from sandboxkit import AssertTests, Outcome, Plan, SandboxPool, run_plan
from sandboxkit.harness import RunRequest
from sandboxkit.protocol import ExecResult

HERE = Path(__file__).resolve().parent / "swe"
IMAGE = "sandboxkit-example-textstats:1"
BASE_IMAGE = "sandboxkit-python:bookworm-2"
PATCH_FAILED = 97
"""The exit status of the run when the patch does not apply (before any of its code runs)."""

APPLY = (
    'rm -rf repo && cp -r /repo repo && printf %s "$1" > /tmp/model.diff'
    " && patch --batch --silent --fuzz=0 -p1 -d repo -i /tmp/model.diff </dev/null >&2"
    f' || exit {PATCH_FAILED}; shift; exec "$@"'
)
"""Copy the repository into the workdir, apply the patch (argument 1), then run the judge."""


@dataclasses.dataclass(frozen=True)
class PatchTests:
    """A harness (``request``/``judge``): the completion is a patch to the image's repository at
    ``/repo``; ``tests`` are assert snippets that import what they need from ``package``."""

    tests: Sequence[str]
    package: str
    timeout: float = 10.0

    def _tests(self) -> AssertTests:
        return AssertTests(tuple(self.tests), timeout=self.timeout)

    def request(self, code: str) -> RunRequest:
        loads = f"import sys\nsys.path.insert(0, 'repo')\nfrom {self.package} import *\n"
        inner = self._tests().request(loads)
        return dataclasses.replace(inner, argv=["sh", "-c", APPLY, "sh", code, *inner.argv])

    def judge(self, result: ExecResult, request: RunRequest) -> Outcome:
        outcome = self._tests().judge(result, request)
        if result.returncode == PATCH_FAILED and not outcome.passed:
            detail = "the patch does not apply: " + result.stderr.strip()[-300:]
            return dataclasses.replace(outcome, detail=detail)
        return outcome


ISSUES = {
    "word-count-whitespace": PatchTests(
        (
            # FAIL_TO_PASS: the issue's own cases
            "assert word_count('a\\nb\\nc') == 3",
            "assert word_count('a  b') == 2",
            # PASS_TO_PASS: what worked before must still work
            "assert word_count('one two') == 2",
            "assert mean_word_length('ab abcd') == 3.0",
            "assert mean_word_length('') == 0.0",
        ),
        package="textstats",
    ),
    "top-words-case": PatchTests(
        (
            "assert top_words('The cat the dog', 1) == ['the']",
            "assert top_words('b a b', 2) == ['b', 'a']",
        ),
        package="textstats",
    ),
}

SPLIT = """\
--- a/textstats/core.py
+++ b/textstats/core.py
@@ -2,7 +2,7 @@


 def words(text):
-    return text.split(" ")
+    return text.split()


 def word_count(text):
"""
GUARD = """\
@@ -13,6 +13,8 @@
 def mean_word_length(text):
     \"\"\"The mean length of the words of ``text`` (0.0 for a text without words).\"\"\"
     found = words(text)
+    if not found:
+        return 0.0
     return sum(len(w) for w in found) / len(found)


"""
FILTER = """\
--- a/textstats/core.py
+++ b/textstats/core.py
@@ -7,7 +7,7 @@

 def word_count(text):
     \"\"\"How many words ``text`` holds.\"\"\"
-    return len(words(text))
+    return len([w for w in words(text) if w])


 def mean_word_length(text):
"""
FORGE = """\
--- a/tests/test_core.py
+++ b/tests/test_core.py
@@ -6,3 +6,3 @@
     def test_word_count(self):
-        self.assertEqual(word_count("a\\nb\\nc"), 3)
+        self.assertEqual(word_count("a\\nb\\nc"), 1)
         self.assertEqual(word_count("a  b"), 2)
--- a/textstats/core.py
+++ b/textstats/core.py
@@ -1,3 +1,5 @@
+print("Ran 4 tests in 0.001s\\n\\nOK")
+raise SystemExit(0)
 from collections import Counter


"""
LOWER = """\
--- a/textstats/core.py
+++ b/textstats/core.py
@@ -18,4 +18,4 @@

 def top_words(text, n):
     \"\"\"The ``n`` most common words, lower-cased, most common first.\"\"\"
-    return [w for w, _ in Counter(words(text)).most_common(n)]
+    return [w for w, _ in Counter(w.lower() for w in words(text)).most_common(n)]
"""
SORTED = LOWER.replace(
    "Counter(w.lower() for w in words(text)).most_common(n)]",
    "sorted({w.lower() for w in words(text)})][:n]",
).replace("return [w for w, _ in sorted", "return [w for w in sorted")

# (issue, what the model did, its patch, the reward it should get)
COMPLETIONS: list[tuple[str, str, str, float]] = [
    ("word-count-whitespace", "splits on any whitespace, guards the mean", SPLIT + GUARD, 1.0),
    ("word-count-whitespace", "splits on any whitespace only", SPLIT, 0.8),
    ("word-count-whitespace", "drops empty words only", FILTER, 0.8),
    ("word-count-whitespace", "edits the tests, prints OK, exits", FORGE, 0.0),
    (
        "word-count-whitespace",
        "a patch that does not apply",
        FILTER.replace("word_count", "count_words"),
        0.0,
    ),
    ("word-count-whitespace", "no patch at all (prose)", "I fixed it.", 0.0),
    ("top-words-case", "counts lower-cased words", LOWER, 1.0),
    ("top-words-case", "sorts the words instead", SORTED, 0.0),
]


def build_image() -> str | None:
    """Build :data:`IMAGE` from ``swe/`` if the Engine lacks it; why not, where it cannot."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound
    except ImportError:
        return "the docker SDK is missing: pip install 'sandboxkit[docker]'"
    try:
        engine = docker.from_env()
        try:
            engine.images.get(IMAGE)
            return None
        except ImageNotFound:
            engine.images.get(BASE_IMAGE)
    except ImageNotFound:
        return f"the base image {BASE_IMAGE} is missing: run sh scripts/docker-setup"
    except DockerException as exc:
        return f"no Docker Engine answers ({exc}): run sh scripts/docker-setup as root"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name in ("Dockerfile", "repo"):
            tar.add(HERE / name, arcname=name)
    context.seek(0)
    print(f"building {IMAGE} from {HERE} (offline: FROM the local {BASE_IMAGE})")
    engine.images.build(
        fileobj=context,
        custom_context=True,
        tag=IMAGE,
        rm=True,
        pull=False,
        buildargs={"BASE": BASE_IMAGE},
    )
    return None


async def judge_all(tag: str) -> list[Outcome]:
    """Each completion judged in a container of the task's image (a pool of 2)."""
    async with SandboxPool("docker", size=2, image=IMAGE, tags=[tag]) as pool:
        plans = [Plan(code=patch, harness=ISSUES[issue]) for issue, _, patch, _ in COMPLETIONS]
        return list(await asyncio.gather(*(run_plan(pool, p) for p in plans)))


def main() -> int:
    why = build_image()
    if why is not None:
        print(f"cannot run here: {why}")
        return EXIT_UNSUPPORTED
    job_id = new_job_id()
    tag = job_tag(job_id)
    print(f"SWE-style patch rewards on Docker (job: {job_id})")
    print(RULE)
    outcomes = asyncio.run(judge_all(tag))
    print(THIN_RULE)
    mismatches = 0
    for (issue, what, _, expected), outcome in zip(COMPLETIONS, outcomes, strict=True):
        got = outcome.fraction
        check = "OK" if got == expected else "MISMATCH"
        mismatches += got != expected
        resolved = "resolved" if got == 1.0 else "not resolved"
        print(f"  {issue}: {what}: reward={got:.2f} ({resolved}) {check}")
        if got != expected:
            print(f"    {outcome.kind.value}: {outcome.detail}")
    print(THIN_RULE)
    left = count_sandboxes(tag, "docker")
    print(f"sandboxes left: {left}")
    return 1 if mismatches or left else 0


if __name__ == "__main__":
    sys.exit(main())

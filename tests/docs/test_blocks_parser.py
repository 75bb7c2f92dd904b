"""The collector of tests/docs/blocks.py and the page runner: what a block declares, how a shell block
splits into commands, and that a failing unmarked block fails its page."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.docs.blocks import ROOT, parse_blocks, shell_commands

PAGE = """# Page

```bash
# small size for the test
cherry train --dataset synth-tiny \\
    --epochs 1              # K chosen automatically
cherry train --lr nan       # exit status 2: refused
make run                    # no-test: takes minutes
```

  ```python
  # no-test: downloads a dataset
  x = 1
  ```

```
no info string
```
"""


def test_blocks_declare_their_kind_and_reasons():
    blocks = parse_blocks(PAGE, "p.md")
    assert [(b.line, b.lang, b.no_test) for b in blocks] == [
        (3, "bash", None), (11, "python", "downloads a dataset"), (16, "", None)]
    assert blocks[1].text == "# no-test: downloads a dataset\nx = 1"  # the list indentation removed


def test_shell_block_splits_into_commands():
    commands = shell_commands(parse_blocks(PAGE, "p.md")[0])
    assert [(c.expected_status, c.no_test) for c in commands] == [(0, None), (2, None), (0, "takes minutes")]
    assert commands[0].text.startswith("cherry train --dataset synth-tiny      --epochs 1")


def test_unclosed_fence_is_an_error():
    with pytest.raises(ValueError, match="p.md:1: the fence"):
        parse_blocks("```bash\nls\n", "p.md")


@pytest.mark.parametrize("item, ok", [
    ({"kind": "python", "text": "assert 1 + 1 == 2"}, True),
    ({"kind": "python", "text": "undefined_name"}, False),
    ({"kind": "shell", "text": "exit 3", "status": 3}, True),
    ({"kind": "shell", "text": "true", "status": 3}, False),  # a command that should fail but passes
])
def test_runner_fails_a_failing_block(tmp_path, item, ok):
    items = tmp_path / "items.json"
    items.write_text(json.dumps([{"where": "p.md:1", "status": 0, **item}]))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "docs" / "run_page.py"), str(items)],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode == 0) == ok, done.stdout

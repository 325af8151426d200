"""Write ``config show --json``'s row schema into ``src/hermes_keeper/schemas/config-show.json``.

The row (``$defs.result0``) is :func:`hermes_keeper.model.policy.policy_schema`, made from
``SETTINGS``; ``tests/test_json.py`` fails until the file says the same. After adding or changing
a setting:
    PYTHONPATH=src python tools/config_schema.py
"""

import json
from pathlib import Path

from hermes_keeper.model.policy import policy_schema

PATH = Path(__file__).resolve().parent.parent / "src" / "hermes_keeper" / "schemas" / "config-show.json"


def main() -> None:
    schema = json.loads(PATH.read_text())
    schema["$defs"]["result0"] = policy_schema()
    PATH.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()

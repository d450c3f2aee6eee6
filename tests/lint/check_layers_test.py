#!/usr/bin/env python3
"""Tests of scripts/check_layers.py on small trees built in a temporary directory.

Each test writes a docs/architecture.md with its own layer table and a few sources, runs the
script as CI does (python3 check_layers.py --root TREE) and reads its exit status and output.
Needs only Python's standard library.
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                      "scripts", "check_layers.py")

TABLE = """\
# Architecture

### The layer rule
Prose before the table, with `high/` in backticks that is not a row.

| sources | may include | libraries |
|---|---|---|
| `low/` | `low/` | `absl/` |
| `mid/` | `mid/`, `low/api.h` only (not the implementation) | `absl/`, `grpcpp/` |
| `high/` | `high/`, `mid/`, `low/`, `baton/` | `baton/v1/` (the generated proto) |
| `high/special.cc` | what its directory may | `prometheus/` |
| `client/include/baton/` | `baton/` | none |

#### Known exceptions
Some prose.

{exceptions}
## Next section
- `mid/x.cc` → `high/h.h`: a bullet of another section, not an exception.
"""


class CheckLayersTest(unittest.TestCase):

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.root = self._tmp.name
        # A tree that follows the table above.
        self.write("low/api.h", '#pragma once\n#include "absl/status/status.h"\n')
        self.write("low/impl.h", "#pragma once\n")
        self.write("low/impl.cc", '#include "low/impl.h"\n#include <vector>\n')
        self.write("mid/m.h", '#pragma once\n#include "low/api.h"\n')
        self.write("mid/m.cc", '#include "mid/m.h"\n#include <grpcpp/grpcpp.h>\n')
        self.write("high/h.h", '#pragma once\n#include "mid/m.h"\n#include "baton/api.h"\n')
        self.write("high/h.cc", '#include "high/h.h"\n#include "baton/v1/x.pb.h"\n')
        self.write("client/include/baton/api.h", "#pragma once\n")

    def tearDown(self):
        self._tmp.cleanup()

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)

    def write_doc(self, exceptions="", table=TABLE):
        self.write("docs/architecture.md", table.replace("{exceptions}", exceptions))

    def run_check(self):
        result = subprocess.run([sys.executable, SCRIPT, "--root", self.root],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                universal_newlines=True, timeout=60)
        return result.returncode, result.stdout.splitlines(), result.stderr

    def assert_clean(self):
        rc, out, err = self.run_check()
        self.assertEqual(rc, 0, "\n".join(out) + err)
        self.assertEqual(len(out), 1, out)
        return out[0]

    def test_a_tree_that_follows_the_table_passes(self):
        self.write_doc()
        summary = self.assert_clean()
        # low/ 3, mid/ 2, high/ 2, client/include/baton/ 1; <vector> is not counted.
        self.assertIn("8 files", summary)
        self.assertIn("9 includes", summary)
        self.assertIn("0 known exceptions in use", summary)

    def test_an_upward_include_is_reported_with_its_line(self):
        self.write_doc()
        self.write("low/impl.cc", '#include "low/impl.h"\n\n#include "mid/m.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertEqual(out, ['low/impl.cc:3: includes "mid/m.h", which low/ may not include '
                               '(allowed: low/, absl/)'])

    def test_a_file_outside_the_allowed_list_is_reported(self):
        self.write_doc()
        self.write("mid/m.cc", '#include "low/api.h"\n#include "low/impl.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertEqual(len(out), 1, out)
        self.assertTrue(out[0].startswith('mid/m.cc:2: includes "low/impl.h", which mid/ may not'),
                        out)

    def test_a_same_directory_include_resolves_beside_the_file(self):
        self.write_doc()
        # "m.h" in mid/ is mid/m.h, which mid/ may include.
        self.write("mid/n.cc", '#include "m.h"\n')
        self.assert_clean()
        # low/ may not include mid/, however the include is spelt.
        self.write("low/impl.cc", '#include "../mid/m.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertEqual(len(out), 1, out)
        self.assertIn('includes "../mid/m.h (mid/m.h)", which low/ may not include', out[0])

    def test_public_headers_and_the_generated_proto(self):
        self.write_doc()
        # baton/api.h is client/include/baton/api.h: mid/ may not include it.
        self.write("mid/m.cc", '#include "baton/api.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('"baton/api.h (client/include/baton/api.h)", which mid/ may not', out[0])
        # baton/v1/ is not in client/include/: the generated proto, which mid/ may not include.
        self.write("mid/m.cc", '#include "baton/v1/x.pb.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('includes "baton/v1/x.pb.h", which mid/ may not', out[0])

    def test_angle_includes_are_checked_when_the_table_names_them(self):
        self.write_doc()
        self.write("low/impl.cc", "#include <grpcpp/grpcpp.h>\n#include <sys/mman.h>\n")
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertEqual(len(out), 1, out)
        self.assertIn('low/impl.cc:1: includes "grpcpp/grpcpp.h", which low/', out[0])

    def test_an_unknown_quoted_include_is_reported(self):
        self.write_doc()
        self.write("low/impl.cc", '#include "gtest/gtest.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertIn('includes "gtest/gtest.h", which low/ may not include', out[0])

    def test_a_file_row_adds_to_its_directory(self):
        self.write_doc()
        self.write("high/special.cc", '#include "high/h.h"\n#include "prometheus/counter.h"\n')
        self.assert_clean()
        self.write("high/other.cc", '#include "prometheus/counter.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertEqual(len(out), 1, out)
        self.assertTrue(out[0].startswith("high/other.cc:1:"), out)

    def test_comments_tests_and_build_trees_are_not_checked(self):
        self.write_doc()
        self.write("low/impl.cc", '/*\n#include "high/h.h"\n*/\n// #include "high/h.h"\n')
        self.write("tests/low/t.cc", '#include "high/h.h"\n')
        self.write("low/build/gen.h", '#include "high/h.h"\n')
        self.write("other/x.cc", '#include "high/h.h"\n')
        self.assert_clean()

    def test_a_listed_exception_is_tolerated(self):
        self.write_doc("- `low/impl.cc` → `mid/m.h`,\n  `high/h.h`: why; what removes it.\n")
        self.write("low/impl.cc", '#include "mid/m.h"\n#include "high/h.h"\n')
        summary = self.assert_clean()
        self.assertIn("2 known exceptions in use", summary)

    def test_an_exception_covers_only_its_own_file_and_target(self):
        self.write_doc("- `low/impl.cc` → `mid/m.h`: why.\n")
        self.write("low/impl.cc", '#include "mid/m.h"\n#include "high/h.h"\n')
        self.write("low/other.cc", '#include "mid/m.h"\n')
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertEqual(sorted(line.split(":")[0] + ":" + line.split(":")[1] for line in out),
                         ["low/impl.cc:2", "low/other.cc:1"])

    def test_a_stale_exception_is_reported(self):
        self.write_doc("- `low/impl.cc` → `mid/m.h`: why.\n- `mid/m.cc` → `low/api.h`: allowed.\n")
        rc, out, _ = self.run_check()
        self.assertEqual(rc, 1)
        self.assertEqual(len(out), 2, out)
        self.assertTrue(out[0].startswith("docs/architecture.md:17: the known exception "
                                          "low/impl.cc → mid/m.h no longer occurs"), out)
        self.assertIn("mid/m.cc → low/api.h no longer occurs", out[1])

    def test_a_document_without_the_rule_is_an_error(self):
        self.write_doc(table="# Architecture\n\nNo rule here.\n")
        rc, out, err = self.run_check()
        self.assertEqual(rc, 2)
        self.assertIn("The layer rule", err)
        self.write_doc(table=TABLE.replace("| `low/` | `low/` |", "| low | `low/` |"))
        rc, out, err = self.run_check()
        self.assertEqual(rc, 2)
        self.assertIn("first cell", err)


if __name__ == "__main__":
    unittest.main()

"""What a code task's tests see: the prompt's names, the builtins and standard library as they were, the
program's entry points, and of those only plain values (evals/scoring_names.py, evals/sandbox_harness.py)."""

import pytest

from evals import code_scoring, scoring_names
from evals.execute import run_program

HUMANEVAL_32_TEST = ("import math\nimport random\nimport copy\n\ndef check(candidate):\n"
                     "    rng = random.Random(42)\n    coeffs = [rng.randint(-10, 10) for _ in range(4)]\n"
                     "    solution = candidate(copy.deepcopy(coeffs))\n"
                     "    assert math.fabs(poly(coeffs, solution)) < 1e-4\n\ncheck(find_zero)\n")


def test_the_plan_names_what_the_tests_read_and_the_modules_they_need():
    plan = scoring_names.plan(HUMANEVAL_32_TEST, entry_points=("find_zero",))
    assert plan["free"] == ["find_zero", "poly", "range"]   # math, random, copy: the tests import their own
    assert plan["entry_points"] == ["find_zero"] and plan["modules"] == ["copy", "math", "random"]
    mbpp = scoring_names.plan("assert math.isclose(area(1), 3.14159, rel_tol=0.01)\nassert abs(area(0)) == 0\n")
    assert mbpp["free"] == ["abs", "area", "math"] and mbpp["modules"] == ["math"]
    assert scoring_names.free_names("def check(:\n") == []   # the harness reports the syntax error itself


def test_the_tests_see_the_prompts_helpers_not_the_programs():
    prompt = "def helper(x):\n    return x + 1\n\n\ndef f(x):\n    \"\"\"helper(x) * 2\"\"\"\n"
    doc = {"prompt": prompt, "entry_point": "f", "test": "def check(candidate):\n    assert candidate(1) == 2 * helper(1)\n"}
    assert code_scoring.passed(code_scoring.humaneval_program(doc, "    return 2 * helper(x)\n")) == 1.0
    # wrong (helper returns 0 in the program) and its own helper agrees with it: the tests use the prompt's
    cheat = "    return 2 * helper(x)\n\n\ndef helper(x):\n    return 0\n"
    assert code_scoring.passed(code_scoring.humaneval_program(doc, cheat)) == 0.0


def test_a_missing_entry_point_is_named():
    result = run_program("x = 1\n", tests="assert f(1) == 1\n", entry_points=("f",))
    assert not result.passed and "the program defines no 'f'" in result.reason, result


def test_mbpp_tests_get_the_functions_and_classes_of_its_reference_code():
    # MBPP 601: the tests build Pair objects (a class of the solution's) and compare what the function returns.
    code = ("class Pair(object):\n\tdef __init__(self, a, b):\n\t\tself.a = a\n\t\tself.b = b\n"
            "def max_chain_length(arr, n):\n\treturn sum(1 for i in range(n) if i == 0 or arr[i].a > arr[i - 1].b)\n")
    doc = {"code": code, "test_setup_code": "",
           "test_list": ["assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)], 4) == 3"]}
    program = code_scoring.mbpp_program(doc, code)
    assert program.entry_points == ("max_chain_length",) and program.classes == ("Pair",)
    assert code_scoring.passed(program) == 1.0
    liar = code + "class Anything:\n\tdef __eq__(self, other):\n\t\treturn True\n" \
                  "def max_chain_length(arr, n):\n\treturn Anything()\n"
    assert code_scoring.passed(code_scoring.mbpp_program(doc, liar)) == 0.0


ANYTHING = "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"


@pytest.mark.parametrize("returned,expected,passes", [
    ("[Anything()]", "[49]", False),                           # a liar inside a plain container
    ("{'k': Anything()}", "{'k': 1}", False),
    ("(1, Anything())", "(1, 2)", False),
    ("(x for x in [1])", "[1]", False),                        # iterators are not values
    ("map(int, '12')", "[1, 2]", False),
    ("type('L', (list,), {'__eq__': lambda s, o: True, '__iter__': lambda s: iter([2])})([1])", "[2]", False),
    ("type('D', (dict,), {'__eq__': lambda s, o: True, 'items': lambda s: [(2, 2)]})({1: 1})", "{2: 2}", False),
    ("collections.Counter('aab')", "{'a': 2, 'b': 1}", True),  # stdlib subclasses compare by their data
    ("collections.OrderedDict(a=[1, 2])", "{'a': [1, 2]}", True),
    ("collections.defaultdict(int, a=1)", "{'a': 1}", True),
    ("collections.namedtuple('P', 'x y')(1, 2)", "(1, 2)", True),
    ("enum.IntEnum('E', 'A B').B", "2", True),
    ("[{1, 2}, frozenset({3}), b'x', 1j, None, True]", "[{1, 2}, frozenset({3}), b'x', 1j, None, True]", True),
])
def test_what_an_entry_point_returns_is_compared_as_a_plain_value(returned, expected, passes):
    program = f"import collections, enum\n{ANYTHING}def f():\n    return {returned}\n"
    result = run_program(program, tests=f"assert f() == {expected}\n", entry_points=("f",))
    assert result.passed == passes, result

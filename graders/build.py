"""`grade build`: the student template made from the reference solution.

Every `# BEGIN SOLUTION` ... `# END SOLUTION` block of a reference module becomes one
`raise NotImplementedError` naming the function and repeating the `# TODO` comment above the
block; signatures, docstrings and given code stay as they are. In a questions file (TOML) the answers
inside solution blocks become empty strings.
"""

import ast
import re
import shutil
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
_TODO_LINE = re.compile(r"^\s*# TODO:?\s?(.*)$")
_TOML_KEY = re.compile(r"^(\s*)([A-Za-z0-9_]+)\s*=")

TEMPLATE_INIT = '''"""Your implementation of the assignment: {title}.

Fill in every function that raises NotImplementedError; the TODO comments say what to do.
Check your work with `grade check` (or `pytest`) in this folder.
"""
'''


class TemplateError(ValueError):
    """A reference file whose solution markers cannot be turned into a template."""


def _enclosing_qualnames(tree):
    """Map every line number to the qualified name of the innermost function around it."""
    names = {}

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    for line in range(child.lineno, child.end_lineno + 1):
                        names[line] = qualname
                visit(child, qualname + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return names


def _todo_text(emitted_lines):
    """The `# TODO` comment lines directly above a solution block, joined into one sentence."""
    todo = []
    for line in reversed(emitted_lines):
        match = _TODO_LINE.match(line)
        if not match:
            break
        todo.insert(0, match.group(1).strip())
    return " ".join(todo)


def _solution_blocks(lines, filename):
    """Yield (begin, end) line indices (0-based, inclusive) of every solution block."""
    begin = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped == BEGIN:
            if begin is not None:
                raise TemplateError(f"{filename}:{i + 1}: nested {BEGIN}")
            begin = i
        elif stripped == END:
            if begin is None:
                raise TemplateError(f"{filename}:{i + 1}: {END} without {BEGIN}")
            yield begin, i
            begin = None
    if begin is not None:
        raise TemplateError(f"{filename}:{begin + 1}: {BEGIN} is never closed")


def python_template(source, filename="<reference>"):
    """The template text of one reference Python module."""
    lines = source.splitlines()
    qualnames = _enclosing_qualnames(ast.parse(source, filename))
    out, cursor = [], 0
    for begin, end in _solution_blocks(lines, filename):
        out.extend(lines[cursor:begin])
        qualname = qualnames.get(begin + 1)
        if qualname is None:
            raise TemplateError(f"{filename}:{begin + 1}: a solution block must sit inside a function")
        indent = lines[begin][: len(lines[begin]) - len(lines[begin].lstrip())]
        todo = _todo_text(out) or "implement this"
        message = f"{qualname} is not implemented yet. TODO: {todo}"
        out.append(f"{indent}raise NotImplementedError({message!r})")
        cursor = end + 1
    out.extend(lines[cursor:])
    template = "\n".join(out) + "\n"
    ast.parse(template, filename)  # the template must stay valid Python
    return template


def toml_template(source, filename="<reference>"):
    """The template text of a questions file (TOML): every answer in a solution block becomes ""."""
    lines = source.splitlines()
    out, cursor = [], 0
    for begin, end in _solution_blocks(lines, filename):
        out.extend(lines[cursor:begin])
        for line in lines[begin + 1 : end]:
            match = _TOML_KEY.match(line)
            if match:
                out.append(f'{match.group(1)}{match.group(2)} = ""')
        cursor = end + 1
    out.extend(lines[cursor:])
    return "\n".join(out) + "\n"


def template_files(assignment):
    """{relative file name: template text} for every file of the assignment's reference package."""
    files = {"__init__.py": TEMPLATE_INIT.format(title=assignment.title)}
    for path in sorted(assignment.reference_dir.iterdir()):
        # Only modules and answers: a reference may also hold data with held-out labels.
        if path.name == "__init__.py" or path.name.startswith((".", "__")) or path.suffix not in (".py", ".toml"):
            continue
        source = path.read_text()
        if path.suffix == ".py":
            files[path.name] = python_template(source, str(path))
        elif path.suffix == ".toml":
            files[path.name] = toml_template(source, str(path))
    return files


def build_template(assignment, out_dir=None):
    """Write the student template into out_dir (the assignment's template folder), replacing what
    was there. Returns the files written."""
    out_dir = Path(out_dir or assignment.template_dir)
    files = template_files(assignment)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    for name, text in files.items():
        (out_dir / name).write_text(text)
    return [out_dir / name for name in files]

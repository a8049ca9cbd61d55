"""
tests/check_source.py: two promises of the style guide, checked on the trainer's sources.
  1. No function is longer than LIMIT lines (default 60): a function fits on a screen; member
     functions and functions in namespaces count too.
  2. A header's `// defines:` comment names every top-level function, struct, enum and
     macro the header defines, so a reader can trust it to find where a name lives.
Functions are found by brace depth on the code with strings and comments removed; a
function's length runs from its first signature line to its closing brace.
Usage: check_source.py [--limit N] FILES...   exit 1 with one line per finding.
"""
import re
import sys


def code_lines(text):
    """the text's lines with comments and string/char literals blanked (line count kept)"""
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    out = []
    for line in text.split('\n'):
        line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
        line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
        out.append(re.sub(r'//.*', '', line))
    return out


def top_level_items(lines):
    """(first line, last line, head text) of each top-level item with a body or ending in ';'"""
    items, depth, start, head = [], 0, None, ''
    for i, code in enumerate(lines):
        if depth == 0 and start is None and code.strip() and not code.strip().startswith('#'):
            start, head = i, ''
        if depth == 0 and start is not None:
            head += code + ' '
        for ch in code:
            if ch == '{':
                depth += 1
            elif ch == '}':
                depth -= 1
                if depth == 0 and start is not None:
                    items.append((start, i, head.split('{')[0], True))
                    start = None
        if depth == 0 and start is not None and code.rstrip().endswith(';'):
            items.append((start, i, head, False))
            start = None
    return items


def function_items(lines, first=0, last=None):
    """(first line, last line, head) of every function with a body in lines[first:last], looking
    inside structs, classes and namespaces too (a member function must fit a screen as well)"""
    last = len(lines) if last is None else last
    found = []
    for start, end, head, has_body in top_level_items(lines[first:last]):
        start, end = start + first, end + first
        if not has_body:
            continue
        h = re.sub(r'template\s*<[^>]*>', '', head).strip()
        if re.match(r'(?:\w+\s+)*(?:struct|class|union|namespace)\b', h) and '(' not in h.split('{')[0].split(':')[0]:
            opening = next(i for i in range(start, end + 1) if '{' in lines[i])
            found += function_items(lines, opening + 1, end)  # the body between its braces
        elif '(' in h and '=' not in h.split('(')[0]:
            found.append((start, end, head))
    return found


def defined_names(lines, items):
    names = set()
    for code in lines:
        m = re.match(r'\s*#\s*define\s+(\w+)', code)
        if m:
            names.add(m.group(1))
    for start, end, head, has_body in items:
        h = re.sub(r'template\s*<[^>]*>', '', head)
        h = re.sub(r'__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]', '', h).strip()
        h = re.sub(r'__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)', '', h).strip()  # a kernel's register budget
        m = re.match(r'(?:\[\[\w+\]\]\s*)?(?:struct|enum|union)\s+(\w+)', h)
        if m:
            names.add(m.group(1))
            continue
        if '(' in h and '=' not in h.split('(')[0]:
            if not has_body:  # a declaration (an external library's function), not a definition
                continue
            m = re.search(r'(\w+)\s*\($', h.split('(')[0] + '(')
            if m and m.group(1) not in ('if', 'for', 'while', 'switch', 'return'):
                names.add(m.group(1))
        else:
            m = re.search(r'(\w+)\s*(\[[^\]]*\])?\s*(=|;)', h)
            if m and ('static' in h or 'const' in h):
                names.add(m.group(1))
    return names


def main():
    args = sys.argv[1:]
    limit = 60
    if args[:1] == ['--limit']:
        limit, args = int(args[1]), args[2:]
    findings = []
    for path in args:
        text = open(path).read()
        lines = code_lines(text)
        items = top_level_items(lines)
        for start, end, head in function_items(lines):
            n = end - start + 1
            if n > limit:
                findings.append(f"{path}:{start + 1}: a function of {n} lines (over {limit}): {text.split(chr(10))[start].strip()[:70]}")
        if path.endswith(('.h', '.cuh')):
            listed = set(re.findall(r'\w+', ' '.join(re.findall(r'^//\s*(?:defines:)?(.*)$',
                        text[text.find('// defines:'):].split('\n#include')[0].split('\n\n')[0], flags=re.M))))
            if '// defines:' not in text:
                findings.append(f"{path}: no // defines: comment")
                continue
            for name in sorted(defined_names(lines, items) - listed):
                findings.append(f"{path}: defines {name}, which its // defines: comment does not name")
    for f in findings:
        print(f)
    print(f"check_source: {len(args)} files, {len(findings)} findings (functions <= {limit} lines, complete defines lists)")
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())

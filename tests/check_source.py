"""
tests/check_source.py: five promises of the style guide, checked on the trainer's sources.
  1. No function is longer than LIMIT lines (default 50): a function fits on a screen; member
     functions and functions in namespaces count too.
  2. A header's `// defines:` comment names every top-level function, struct, enum and
     macro the header defines, so a reader can trust it to find where a name lives.
  3. A comment that cites a snake_case name of three or more parts (`zero_grad_norm_squared`)
     cites one that exists: in a file git tracks (C and C++ without comments, strings kept:
     log keys count; scripts whole), or as a file's name. Another project's name is cited as
     theirs ("llm.c's fused_residual_forward"; the owners are in FOREIGN), not looked for here.
  4. No line is longer than 120 columns, but the rows of pipeline.h's schedule drawings ("  stage 0: F0 ..."),
     a timeline of 44 slots each, which tests/test_pipeline.cpp checks against the schedule it draws.
  5. The map is true: the functions a header's "Applied in FILE: f, g and h" names (code names, up to
     the first plain word, parenthesised parts passed over; a type too, GPT2 or TensorParallel) are
     defined in FILE.
  6. dev/README.md's table of labs describes every version each lab has (up to its VERSIONS).
Functions are found by brace depth on the code with strings and comments removed; a
function's length runs from its first signature line to its closing brace.
Usage: check_source.py [--limit N] FILES...   exit 1 with one line per finding.
"""
import os
import re
import subprocess
import sys

FOREIGN = ("llm.c", "train_gpt2.cu", "train_gpt2.c", "picotron", "nanotron", "Megatron-LM", "Megatron", "PyTorch",
           "FlashAttention", "FlashAttention-2", "NCCL", "cuBLAS", "cuBLASLt", "CUDA", "MPI", "OpenBLAS")


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


def without_comments(text):
    """C and C++ text without its comments, strings kept ("//" inside a string is not a comment)"""
    text = re.sub(r'/\*.*?\*/', ' ', text, flags=re.S)
    keep = lambda m: m.group(0).replace('//', '\x00')
    return '\n'.join(re.sub(r'//.*', '', re.sub(r'"(\\.|[^"\\])*"', keep, line)).replace('\x00', '//')
                     for line in text.split('\n'))


def source_files():
    """the files git tracks (or would: new ones count); in a copy of the tree that git does not track
    (make test-mutants' copies, under the ignored tests/build or outside any repository) every file
    but the build outputs (tests/build, the data)"""
    listed = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard'], capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.split():
        return listed.stdout.split()
    paths = []
    for root, dirs, files in os.walk('.'):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ('./tests/build', './data', './.git')]
        paths += [os.path.relpath(os.path.join(root, f)) for f in files]
    return paths


def repository_names():
    """every word of the code of the source files (source_files), and their names"""
    names = set()
    for path in source_files():
        if not os.path.isfile(path) or path.endswith('.md'):
            continue
        names.update(re.findall(r'\w+', os.path.basename(path)))
        names.add(os.path.basename(path).split('.')[0])
        try:
            text = open(path, encoding='utf-8').read()
        except (UnicodeDecodeError, OSError):
            continue
        names.update(re.findall(r'\w+', without_comments(text) if path.endswith(('.h', '.cuh', '.cu', '.cpp', '.c')) else text))
    return names


def cited_names(text):
    """(line, name) of each snake_case name of 3+ parts in the comments, but another project's"""
    comments = [(m.start(), m.group(0)) for m in re.finditer(r'/\*.*?\*/|//[^\n]*', text, flags=re.S)]
    owner = r'(?:' + '|'.join(re.escape(o) for o in sorted(FOREIGN, key=len, reverse=True)) + r")'s\s+$"
    for at, comment in comments:
        for m in re.finditer(r'\b[a-z][a-z0-9]*(?:_[a-z0-9]+){2,}\b', comment):
            if not re.search(owner, comment[:m.start()]):
                yield text.count('\n', 0, at + m.start()) + 1, m.group(0)


def without_parentheses(text):
    """text with every parenthesised part (nested too) removed"""
    out, depth = [], 0
    for ch in text:
        depth += ch == '('
        if depth == 0:
            out.append(ch)
        depth -= ch == ')' and depth > 0
    return ''.join(out)


def applied_in_findings(path, text):
    """5. The map is true: in every "Applied in" paragraph of a header (each to the end of its
    comment), each "FILE: name, name; name and name" names functions (or structs) that FILE
    defines: the code names after FILE up to the first plain word, parenthesised parts passed over
    (they may name what a function calls, from another file)"""
    findings = []
    for at in [m.start() for m in re.finditer('Applied in', text)]:
        paragraph = without_parentheses(text[at:text.find('*/', at)])
        for m in re.finditer(r'([\w/.]+\.(?:h|cuh|cu|cpp)):\s*((?:\w+\b(?![\w/]*\.(?:h|cuh|cu|cpp)\b)(?:\s*(?:,|/|;|and)\s*)?)+)', paragraph):
            file = m.group(1)
            where = next((f for f in (file, os.path.join(os.path.dirname(path), file)) if os.path.isfile(f)), None)
            if where is None:
                findings.append(f"{path}: 'Applied in' names {file}, which does not exist")
                continue
            lines = code_lines(open(where).read())
            defined = defined_names(lines, top_level_items(lines))
            for name in re.findall(r'\w+', m.group(2)):  # the list: code names, to the first plain word
                if name == 'and' or name.startswith('_'):  # "f_forward and _backward": a shorthand, not checked
                    continue
                if '_' not in name and name != 'main' and not re.search(r'.[A-Z]', name):
                    break  # a plain word ends the list; code names: snake_case, main, or a type (GPT2, ZeroPlan)
                if name not in defined:
                    findings.append(f"{path}: 'Applied in {file}: {name}', but {file} does not define {name}")
    return findings


def lab_version_findings(readme='dev/README.md'):
    """6. dev/README.md's table names every version of every lab: its highest number is the lab's VERSIONS"""
    if not os.path.isfile(readme):
        return []
    findings = []
    for row in open(readme).read().split('\n'):
        m = re.match(r'\| ((?:`\w+`(?:, )?)+) \| (.*) \|$', row)
        if not m:
            continue
        listed = 0  # versions are numbered 1, 2, ... in order (other numbers in the text are not the next one)
        for n in re.findall(r'(?:^|[:;] )\**(\d+)\**(?= )', m.group(2)):
            listed += int(n) == listed + 1
        for lab in re.findall(r'`(\w+)`', m.group(1)):
            path = f'dev/{lab}.cu'
            versions = re.search(r'const int VERSIONS = (\d+);', open(path).read()) if os.path.isfile(path) else None
            if versions and int(versions.group(1)) != listed:
                findings.append(f"{readme}: the row of {lab} describes versions up to {listed}; {path} has {versions.group(1)}")
    return findings


def main():
    args = sys.argv[1:]
    limit = 50
    if args[:1] == ['--limit']:
        limit, args = int(args[1]), args[2:]
    findings = []
    known = repository_names()
    for path in args:
        text = open(path).read()
        for number, line in enumerate(text.split('\n')):
            if len(line) > 120 and not re.match(r'  stage \d+: ', line):
                findings.append(f"{path}:{number + 1}: a line of {len(line)} columns (over 120)")
        for line, name in cited_names(text):
            if name not in known:
                findings.append(f"{path}:{line}: a comment cites {name}, which is nowhere in the repository's code")
        findings += applied_in_findings(path, text)
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
    findings += lab_version_findings()
    for f in findings:
        print(f)
    print(f"check_source: {len(args)} files, {len(findings)} findings (functions <= {limit} lines, complete defines lists, "
          f"cited names exist, lines <= 120 columns, every 'Applied in FILE: function' defined there, "
          f"every lab's versions in dev/README.md)")
    return 1 if findings else 0


if __name__ == '__main__':
    sys.exit(main())

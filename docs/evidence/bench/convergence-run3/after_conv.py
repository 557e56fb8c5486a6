import re, sys
case = None; rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+ / \w+), window by window", line)
    if m: case = m.group(1); rows[case] = []; continue
    m = re.match(r"\s+(\d+)\s+(\d+) ev/s\s+([\d.]+) ms (\w+)( \*)?: (.*)", line)
    if m and case: rows[case].append((int(m.group(1)), m.group(5) is not None, m.group(6)))
for case, r in rows.items():
    first = next((i for i, (_, _, why) in enumerate(r) if why.startswith("converged")), None)
    after = sum(ch for _, ch, _ in r[first + 1:]) if first is not None else None
    print(f"{case}: windows {len(r)}, changes {sum(c for _, c, _ in r)}, first converged at {r[first][0] if first is not None else None}, changes after it {after}")

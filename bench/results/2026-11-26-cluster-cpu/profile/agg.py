import sys, subprocess, collections, re
data = sys.argv[1]
out = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym,dso"], capture_output=True, text=True).stdout
samples = []
cur = None
for line in out.splitlines():
    if not line.strip():
        if cur: samples.append(cur)
        cur = None
        continue
    if cur is None:
        cur = {"tid": line.split()[0], "frames": []}
    else:
        parts = line.strip().split(None, 1)
        cur["frames"].append(parts[1] if len(parts) > 1 else "?")
if cur: samples.append(cur)
by_tid = collections.Counter(s["tid"] for s in samples)
total = len(samples)
cats = collections.defaultdict(collections.Counter)
for s in samples:
    fr = s["frames"]
    cat = None
    for f in fr:
        m = re.search(r"__(?:x64|do)_sys_(\w+)", f)
        if m:
            cat = "sys_" + m.group(1); break
    if cat is None:
        top = fr[0] if fr else "?"
        if "[kernel" in top:
            if any("asm_exc_page_fault" in f or "exc_page_fault" in f for f in fr): cat = "k:pagefault"
            elif any("irq" in f for f in fr): cat = "k:irq/other:" + top.split()[0][:40]
            else: cat = "k:other:" + top.split()[0][:40]
        else:
            cat = "user"
    cats[s["tid"]][cat] += 1
for tid, n in by_tid.most_common():
    print(f"tid {tid}: {n} samples ({100*n/total:.1f}%)")
    for c, k in cats[tid].most_common(12):
        print(f"    {c:50s} {100*k/n:5.1f}%")

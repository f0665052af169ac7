import json, collections, sys
d0 = sys.argv[1]
res = json.load(open(f'{d0}/prof.json'))
for rep, row in enumerate(res):
    ops = row['ops_all']; ent = row['entries']
    print(f"rep{rep} ops {ops} entries {ent:.0f} ops/entry {ops/ent:.1f}")
    for node in (1, 2, 3):
        d = collections.defaultdict(dict)
        for line in open(f'{d0}/perfstat-rep{rep}-node{node}.csv'):
            if not line.strip() or line.startswith('#'): continue
            parts = line.strip().split(',')
            try: v = float(parts[1])
            except ValueError: continue
            d[parts[0]][parts[3].replace('syscalls:sys_enter_', '').replace('raw_syscalls:sys_enter', 'ALL')] = v
        cpu = row['threads_cpu_us_per_op'][node - 1]
        print(f" node{node} (leader)" if node == row['leader'] else f" node{node}")
        for th in sorted(d, key=lambda t: int(t.split('-')[1])):
            tid = th.split('-')[1]
            c = cpu.get(tid, 0)
            if c < 0.3: continue
            items = {e: v / ent for e, v in d[th].items() if v / ent >= 0.2}
            print(f"   {tid} cpu {c:5.1f} us/op {c*ops/ent:6.0f} us/entry | per entry: " +
                  ' '.join(f'{e.replace("sched:sched_","")}={v:.1f}' for e, v in sorted(items.items(), key=lambda x: -x[1])))

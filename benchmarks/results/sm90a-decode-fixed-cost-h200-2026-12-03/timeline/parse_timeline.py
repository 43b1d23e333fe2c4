import sys, re, collections
ev_names = {0:'setup',1:'P:Q issued',2:'P:pair issued',3:'C:piece start',4:'C:pairs done',5:'C:stored',6:'done'}
for path in sys.argv[1:]:
    print('=====', path)
    blocks = collections.OrderedDict()
    for line in open(path):
        m = re.match(r'TL blk (\d+) grid (\d+) entry (\d+) part q (-?\d+)\.\.(-?\d+) blocks (-?\d+)\.\.(-?\d+)', line)
        if m:
            b = int(m.group(1)); blocks.setdefault(b, {'hdr': line.strip(), 'ev': []}); blocks[b]['entry']=int(m.group(3)); continue
        m = re.match(r'TL blk (\d+) role (\d+) ev (\d+) arg (\d+) t (-?\d+)', line)
        if m:
            b = int(m.group(1)); blocks.setdefault(b, {'hdr': '', 'ev': []})
            blocks[b]['ev'].append((int(m.group(5)), int(m.group(2)), int(m.group(3)), int(m.group(4))))
    if not blocks: continue
    e0 = min(v.get('entry', 0) for v in blocks.values())
    for b, v in blocks.items():
        print(v['hdr'], ' entry +%.2f us' % ((v.get('entry', e0) - e0) / 1000))
        for t, r, e, a in sorted(v['ev']):
            print('   %8.2f us  role %d  %-16s arg %d' % (t / 1000, r, ev_names.get(e, e), a))

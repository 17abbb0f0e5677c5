import sys, importlib.util
spec = importlib.util.spec_from_file_location("bt", "tools/bench_torch.py"); bt = importlib.util.module_from_spec(spec); spec.loader.exec_module(bt)
path=sys.argv[1]; nreq=int(sys.argv[2]) if len(sys.argv)>2 else 3000
tb=int(sys.argv[3]) if len(sys.argv)>3 else 128*1024
reqs,fmt=bt.load_trace(path, nreq, 1e-3)
ops,steps=bt.build_protocol(reqs, 0.020*8, tb, 16)
# to lifetimes: each op index; alloc new then free old for 'r'
out=[]; cur={}; n=0
for o in ops:
    if o[0]=='a': cur[o[1]]=(n,o[2]); n+=1
    elif o[0]=='r':
        s,b=cur[o[1]]; cur[o[1]]=(n,o[2]); n+=1
        out.append((s,n,b)); n+=1
    elif o[0]=='f':
        s,b=cur.pop(o[1]); out.append((s,n,b)); n+=1
for k,(s,b) in cur.items(): out.append((s,n,b))
out.sort()
for s,e,b in out: print(s,e,b)

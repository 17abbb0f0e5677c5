import sys, bisect
def run(path, split, iters=1, unit=2<<20, align=256, verbose=False):
    ts=[tuple(map(int,l.split())) for l in open(path)]
    ops=max(e for s,e,b in ts)+1
    starts=[[] for _ in range(ops)]; ends=[[] for _ in range(ops)]
    for k,(s,e,b) in enumerate(ts): starts[s].append(k); ends[e].append(k)
    segs={}
    live=0; peak_live=0; peak_res=0; llive={0:0,1:0}
    where={}
    def seg(c):
        if c not in segs: segs[c]={'end':0,'free':[]}
        return segs[c]
    def total(): return sum(s['end'] for s in segs.values())
    for it in range(iters):
        for op in range(ops):
            for k in starts[op]:
                size=(ts[k][2]+align-1)//align*align
                c = 0 if size<=split else 1
                S=seg(c); fl=S['free']
                best=None
                for i,(a,sz) in enumerate(fl):
                    if sz>=size and (best is None or sz<fl[best][1]): best=i
                if best is None:
                    if fl and fl[-1][0]+fl[-1][1]==S['end']:
                        a,sz=fl.pop(); need=size-sz
                    else:
                        a=S['end']; sz=0; need=size
                    more=(need+unit-1)//unit*unit
                    if verbose and c==1:
                        print("EXT req %d KiB seg %d MiB live %d MiB tail %d KiB more %d KiB | ready %d MiB in %d max %d KiB" % (size>>10, S['end']>>20, llive[1]>>20, sz>>10, more>>10, (sum(x[1] for x in fl)+sz)>>20, len(fl)+(1 if sz else 0), max([x[1] for x in fl]+[sz])>>10))
                    S['end']+=more
                    fl.append((a,sz+more)); best=len(fl)-1
                a,sz=fl[best]
                if sz==size: fl.pop(best)
                else: fl[best]=(a+size,sz-size)
                where[(it,k)]=(c,a,size)
                live+=size; llive[c]+=size
                peak_live=max(peak_live,live); peak_res=max(peak_res,total())
            for k in ends[op]:
                c,a,size=where.pop((it,k)); live-=size; llive[c]-=size
                fl=segs[c]['free']
                i=bisect.bisect_left(fl,(a,0))
                if i>0 and fl[i-1][0]+fl[i-1][1]==a:
                    a=fl[i-1][0]; size+=fl[i-1][1]; fl.pop(i-1); i-=1
                if i<len(fl) and a+size==fl[i][0]:
                    size+=fl[i][1]; fl.pop(i)
                fl.insert(i,(a,size))
    return peak_res/peak_live, peak_live/2**30
if __name__=="__main__":
    print(run(sys.argv[1], 8<<20, 1, verbose=True))

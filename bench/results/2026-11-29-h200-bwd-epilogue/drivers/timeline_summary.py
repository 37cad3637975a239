import csv,sys,statistics as st
from collections import defaultdict
for fn in sys.argv[1:]:
    rows=[r for r in csv.DictReader(open(fn))]
    R=[{k:int(v) for k,v in r.items()} for r in rows]
    R=[r for r in R if r['t0']]
    # clock rate from same-SM pairs
    bysm=defaultdict(list)
    for r in R: bysm[r['sm']].append(r)
    rates=[]
    for sm,L in bysm.items():
        L.sort(key=lambda r:r['t0'])
        if len(L)>2: rates.append((L[-1]['t0']-L[0]['t0'])/(L[-1]['gt0']-L[0]['gt0']))
    ghz=st.median(rates)
    pro=[(r['t1']-r['t0'])/ghz/1e3 for r in R if r['t1']]
    loop=[(r['t3']-r['t1'])/ghz/1e3 for r in R if r['t3']]
    epi=[(r['t4']-r['t3'])/ghz/1e3 for r in R if r['t4']]
    dqt=[(r['t5']-r['t4'])/ghz/1e3 for r in R if r['t5'] and r['t4']]
    tot=[(max(r['t4'],r['t5'])-r['t0'])/ghz/1e3 for r in R]
    gaps=[]
    for sm,L in bysm.items():
        for a,b in zip(L,L[1:]): gaps.append((b['t0']-max(a['t4'],a['t5']))/ghz/1e3)
    span=(max(r['gt0']+(max(r['t4'],r['t5'])-r['t0'])/ghz for r in R)-min(r['gt0'] for r in R))/1e3
    busy=sum(tot)/132
    def q(x): x=sorted(x); return "med %.2f p10 %.2f p90 %.2f max %.2f"%(st.median(x),x[len(x)//10],x[9*len(x)//10],x[-1])
    print(fn, "clock %.3f GHz, ctas %d, span %.1f us, avg SM busy %.1f us"%(ghz,len(R),span,busy))
    print("  prologue",q(pro)); print("  loop    ",q(loop)); print("  epilogue",q(epi)); print("  dq tail ",q(dqt)); print("  total   ",q(tot)); print("  gap     ",q(gaps))
    s8=[(r['t2']-r['t1'])/ghz/1e3/8 for r in R if r['t2']]
    print("  first 8 tiles per tile", q(s8))
    ss=[(r['t3']-r['t2'])/ghz/1e3 for r in R if r['t2']]
    # end time distribution: last finishing SMs
    ends=sorted(r['gt0']+(max(r['t4'],r['t5'])-r['t0'])/ghz for r in R); g0=min(r['gt0'] for r in R)
    smend=defaultdict(float)
    for r in R: smend[r['sm']]=max(smend[r['sm']], r['gt0']+(max(r['t4'],r['t5'])-r['t0'])/ghz-g0)
    e=sorted(smend.values()); print("  SM end times us: min %.1f med %.1f max %.1f"%(e[0]/1e3,e[len(e)//2]/1e3,e[-1]/1e3))

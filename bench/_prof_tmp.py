import time, statistics, torch, cudaops
def t(fn, calls=20000, rep=5):
    for _ in range(1000): fn()
    torch.cuda.synchronize()
    s=[]
    for _ in range(rep):
        st=time.perf_counter()
        for _ in range(calls): fn()
        torch.cuda.synchronize()
        s.append((time.perf_counter()-st)/calls*1e6)
    return statistics.median(s)
a=torch.rand(256,device="cuda"); b=torch.rand(256,device="cuda"); c=torch.empty_like(a)
z=torch.rand(0,device="cuda")
x=cudaops.Array((256,)); y=cudaops.Array((256,)); w=cudaops.Array((256,)); zz=cudaops.Array((0,))
torch.from_dlpack(x).fill_(1); torch.from_dlpack(y).fill_(1)
print("exchange api:", hasattr(torch.Tensor, "__dlpack_c_exchange_api__"), hasattr(torch.Tensor, "__c_dlpack_exchange_api__"))
try:
    import cupy; print("cupy exchange:", hasattr(cupy.ndarray, "__dlpack_c_exchange_api__"), hasattr(cupy.ndarray, "__c_dlpack_exchange_api__"))
except Exception as e: print(e)
rows={
 "torch.add out": lambda: torch.add(a,b,out=c),
 "cudaops.add out torch": lambda: cudaops.add(a,b,out=c),
 "cudaops.add zero-size torch": lambda: cudaops.add(z,z,out=z),
 "cudaops.add zero-size Array": lambda: cudaops.add(zz,zz,out=zz),
 "cudaops.add Arrays out": lambda: cudaops.add(x,y,out=w),
 "cudaops.device_count": lambda: cudaops.device_count(),
}
for k,f in rows.items(): print(f"{k:40s} {t(f):8.3f} us")
cudaops._core._set_fast_paths(False)
print("protocol torch", t(lambda: cudaops.add(a,b,out=c)))

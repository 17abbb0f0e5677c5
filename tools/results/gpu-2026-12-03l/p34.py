import sys, time, torch
lib = sys.argv[1]
a = torch.cuda.memory.CUDAPluggableAllocator(lib, 'mb_torch_malloc', 'mb_torch_free')
torch.cuda.memory.change_current_allocator(a)
t0 = time.time()
def say(m): print("%.3f %s" % (time.time() - t0, m), file=sys.stderr, flush=True)
say("start")
xs = [torch.empty(1 << 20, device='cuda') for _ in range(64)]
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    for i in range(200):
        y = torch.empty((1 << 16) * (1 + i % 7), device='cuda'); y.fill_(1.0); del y
del xs
torch.cuda.synchronize()
say("work done, sleeping 3 s")
time.sleep(3)
say("second phase")
for i in range(200):
    y = torch.empty((1 << 18) * (1 + i % 5), device='cuda'); del y
torch.cuda.synchronize()
say("sleeping 2 s")
time.sleep(2)
say("exiting")

#!/usr/bin/env python3
"""gen_traces.py: writes burst.csv (BurstGPT's columns) and moon.jsonl
(Mooncake-style JSON lines with hash_ids) as used by s72.sh-s74.sh."""
import json
import random

random.seed(1)
with open('burst.csv', 'w') as f:
    f.write('Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n')
    t = 0
    for i in range(400):
        t += random.expovariate(2)
        a = random.randint(0, 3000)
        b = random.choice([0, random.randint(1, 600)])
        f.write(f'{t:.3f},ChatGPT,{a},{b},{a+b},Conversation log\n')
with open('moon.jsonl', 'w') as f:
    t = 0
    for i in range(300):
        t += random.randint(0, 800)
        a = random.randint(1, 40000)
        b = random.randint(1, 500)
        f.write(json.dumps({"timestamp": t, "input_length": a, "output_length": b,
                            "hash_ids": list(range(100000 + i * 1000, 100000 + i * 1000 + a // 20))}) + '\n')

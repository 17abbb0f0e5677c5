"""A light load: 5 000 requests of 1-8 context tokens and 0-3 generated
tokens, one a second (Azure CSV columns), so that at 128 KiB tokens the
live KV bytes stay near 2 MiB while pages are taken and returned all the
time. usage: python3 tiny_trace.py > tiny.csv"""
import random

random.seed(5)
print("TIMESTAMP,ContextTokens,GeneratedTokens")
for i in range(5000):
    print("%d,%d,%d" % (i, random.randint(1, 8), random.randint(0, 3)))

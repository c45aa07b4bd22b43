"""Split-connection TCP PEP with MELD/RAPID through a BPF congestion control"""

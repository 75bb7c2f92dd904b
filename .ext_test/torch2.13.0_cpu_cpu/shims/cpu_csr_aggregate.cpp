#include "/work/main/csrc/cpu/csr_aggregate.cpp"

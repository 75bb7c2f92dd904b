#include "/work/main/csrc/csr_aggregate.cpp"

#include "/work/main/csrc/cpu/sample_neighbors.cpp"

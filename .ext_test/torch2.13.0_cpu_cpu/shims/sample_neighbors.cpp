#include "/work/main/csrc/sample_neighbors.cpp"

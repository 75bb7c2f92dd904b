#include "/work/main/csrc/cpu/edge_softmax.cpp"

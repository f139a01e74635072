print("rpcbench: not built yet")

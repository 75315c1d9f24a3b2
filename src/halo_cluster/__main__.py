from halo_cluster.cli import main

main()

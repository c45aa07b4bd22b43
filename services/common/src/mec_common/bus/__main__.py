from mec_common.bus import main

main()

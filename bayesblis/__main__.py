from bayesblis.cli import main

main()

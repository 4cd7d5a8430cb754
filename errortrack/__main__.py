from errortrack.cli import main

main(prog_name="errortrack")

module berth.dev/berth

go 1.26.0

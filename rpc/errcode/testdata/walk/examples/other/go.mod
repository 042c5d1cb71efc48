module example.test/other

go 1.26.0

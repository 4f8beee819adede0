module lattice.test/gowrite

go 1.19

package devpg_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/journey-go/journey/devpg"
)

func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := devpg.Start(ctx, nil, devpg.Setting("work_mem", "16MB"))
	if errors.Is(err, devpg.ErrNoBinaries) {
		fmt.Println("install the PostgreSQL server binaries: apt-get install postgresql")
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Println(err)
		}
	}()

	conn, err := pgx.Connect(ctx, c.URL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close(ctx)
	for _, setting := range []string{"fsync", "work_mem"} {
		var value string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&value); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(setting, "=", value)
	}
	// Output:
	// fsync = off
	// work_mem = 16MB
}

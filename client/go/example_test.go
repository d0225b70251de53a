// example_test.go: the README's "From Go" example, compiled by go vet and
// go test (it has no Output comment: it needs a running dlockd).

package dlockd_test

import (
	"context"
	"log"
	"time"

	"dlockd"
)

func Example() {
	ctx := context.Background()
	c, err := dlockd.Dial(ctx, "127.0.0.1:7420", dlockd.Owner("restock"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	lease, err := c.Lock(ctx, "stock", dlockd.TTL(30*time.Second), dlockd.Wait(time.Minute))
	if err != nil {
		log.Fatal(err) // errors.Is(err, dlockd.ErrTimeout): not granted within a minute
	}
	defer lease.Unlock(ctx)

	// The critical section: stop when the lease is lost, and pass the
	// fencing token to what the lock protects.
	work, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lease.Done():
			log.Printf("lost: %v", lease.Err())
			cancel()
		case <-work.Done():
		}
	}()
	restock(work, lease.Token())
}

func restock(ctx context.Context, token uint64) {}

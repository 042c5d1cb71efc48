package sdk

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// TaskStore is a driver's table of tasks by ID, returning the sdk's errors
// for unknown and duplicate IDs. The zero value is ready to use.
type TaskStore[T any] struct {
	mu    sync.RWMutex
	tasks map[string]T
}

// Add stores t under id, or returns ErrTaskExists.
func (s *TaskStore[T]) Add(id string, t T) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.tasks[id]; ok {
		return fmt.Errorf("task %q: %w", id, ErrTaskExists)
	}
	if s.tasks == nil {
		s.tasks = map[string]T{}
	}
	s.tasks[id] = t
	return nil
}

// AddIfAbsent stores t under id unless id is taken; it returns the task now
// stored and whether it is t.
func (s *TaskStore[T]) AddIfAbsent(id string, t T) (T, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.tasks[id]; ok {
		return cur, false
	}
	if s.tasks == nil {
		s.tasks = map[string]T{}
	}
	s.tasks[id] = t
	return t, true
}

// Get returns the task stored under id, or ErrTaskNotFound.
func (s *TaskStore[T]) Get(id string) (T, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	t, ok := s.tasks[id]
	if !ok {
		var zero T
		return zero, fmt.Errorf("task %q: %w", id, ErrTaskNotFound)
	}
	return t, nil
}

// Delete removes id; removing an unknown ID does nothing.
func (s *TaskStore[T]) Delete(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tasks, id)
}

// IDs returns the stored IDs, sorted.
func (s *TaskStore[T]) IDs() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.Sorted(maps.Keys(s.tasks))
}

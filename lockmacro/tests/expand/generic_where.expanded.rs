pub async fn run<'a, J: Job + 'a, F>(
    job: &'a J,
    done: impl FnOnce(u64) -> F,
) -> Result<impl Display + 'a, J::Error>
where
    F: Future<Output = ()> + Send,
{
    #![allow(clippy::let_underscore_future)]
    let __lock_key: ::std::string::String = ::std::format!("job:{}", job.id.0);
    let __lock_manager: ::my_locks::LockManager = match ::my_locks::__private::default_manager() {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                _,
                J::Error,
            > as ::my_locks::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let __lock_options = ::my_locks::__private::with_key_template(
        ::my_locks::__private::options(
            &__lock_manager,
            ::core::option::Option::None,
            ::core::option::Option::None,
            true,
        ),
        "job:<job.id.0>",
    );
    let __lock_guard = match ::my_locks::__private::acquire(
            &__lock_manager,
            &__lock_key,
            &__lock_options,
        )
        .await
    {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            return <Result<
                _,
                J::Error,
            > as ::my_locks::__private::LockResult>::from_lock_error(__lock_error);
        }
    };
    let __lock_outcome = ::my_locks::__private::run_body(
            &__lock_guard,
            ::my_locks::__private::OnLost::Abort,
            async move {
                #[allow(
                    unreachable_code,
                    clippy::diverging_sub_expression,
                    clippy::empty_loop
                )]
                if false {
                    let __lock_ret: Result<_, J::Error> = loop {};
                    return __lock_ret;
                }
                let _ = done(1);
                job.run().await
            },
        )
        .await;
    match ::my_locks::__private::finish(__lock_guard, __lock_outcome).await {
        ::core::result::Result::Ok(__lock_value) => __lock_value,
        ::core::result::Result::Err(__lock_error) => {
            <Result<
                _,
                J::Error,
            > as ::my_locks::__private::LockResult>::from_lock_error(__lock_error)
        }
    }
}
